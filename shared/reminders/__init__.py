"""reminders: deliver the messages applications promise people for later."""

__version__ = "0.1.0"
