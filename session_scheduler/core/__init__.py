"""The pure core: the state machine, the role table, every name and schema, configuration, the clock seam."""
