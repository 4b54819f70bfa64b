"""Every pyplot function is a no-op here."""


def _nothing(*args, **kwargs):
    return None


def __getattr__(name):
    if name.startswith("__"):
        raise AttributeError(name)
    return _nothing
