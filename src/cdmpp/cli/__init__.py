"""The `cdmpp` command line; shared argument parsing lives here."""


def csv_list(text: str) -> tuple[str, ...]:
    """A comma-separated command-line value: "a, b,,c" -> ("a", "b", "c")."""
    return tuple(part.strip() for part in text.split(",") if part.strip())
