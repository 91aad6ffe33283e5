"""The delivery console: ``reminders console`` serves it on this machine.

Pages read through :mod:`reminders.operator` (the functions the command line calls) and act
through it too; nothing here is possible only here. Starlette, Jinja2, uvicorn and pygal are
the ``console`` extra: this package is imported only by the ``console`` command, never by a
Lambda handler, and none of them is in the Lambda layer.
"""
