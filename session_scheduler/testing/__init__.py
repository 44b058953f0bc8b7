"""Stand-ins and fault tooling built on the product: the in-process runner, seams, kill cases, the red team."""
