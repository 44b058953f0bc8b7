"""The project's records: the state file, the event log, hand-off files, their tools and history, atomic writes."""
