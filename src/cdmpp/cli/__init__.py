"""The `cdmpp` command line; shared argument parsing lives here."""


def csv_list(text: str) -> tuple[str, ...]:
    """A comma-separated command-line value: "a, b,,c" -> ("a", "b", "c")."""
    return tuple(part.strip() for part in text.split(",") if part.strip())


def positive_int(text: str) -> int:
    """argparse type: an integer >= 1 (0 or less is refused, not read as "the default")."""
    return _int_at_least(text, 1)


def non_negative_int(text: str) -> int:
    """argparse type: an integer >= 0."""
    return _int_at_least(text, 0)


def _int_at_least(text: str, low: int) -> int:
    import argparse

    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if value < low:
        raise argparse.ArgumentTypeError(f"must be at least {low}, got {value}")
    return value
