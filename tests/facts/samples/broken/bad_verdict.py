CLAIM = "An experiment that returns no verdict."
EXPECTED = "true"


def run() -> str:
    return "maybe"
