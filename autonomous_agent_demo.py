"""The command line (`python autonomous_agent_demo.py --help`): a face over `session_scheduler.view.cli`."""

from session_scheduler.view.cli import main

if __name__ == "__main__":
    main()
