"""The scheduler's own git: operations, ref reading, the guard of git's settings, the restore point, adoption."""
