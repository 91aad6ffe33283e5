"""``python -m reminders.cli``: the ``reminders`` command."""

from reminders.cli import main

raise SystemExit(main())
