"""Running sessions: the loop, the plan, the brief, the runner seam, classification, verification, the run's summary."""
