"""What a person sees: the command line, the live console, notifications, status and the reports."""
