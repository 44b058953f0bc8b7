"""The session scheduler. Its layers are the sub-packages, each importing only those before it:
core, store, guard, repo, run, view (and testing, which may import them all)."""
