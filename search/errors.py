"""The one error a command raises for a mistake the user can fix, shared by every command module."""


class UserError(Exception):
    """A mistake the user can fix; printed as one line, exit status 2."""
