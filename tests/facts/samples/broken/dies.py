CLAIM = "An experiment whose process dies."
EXPECTED = "true"


def run() -> str:
    import os

    os._exit(3)
