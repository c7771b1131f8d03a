"""The one error type users see: a one-line message, exit status 2 from the CLI."""


class FedpdError(Exception):
    """Bad input (config, arguments, files): the message names what is wrong and what is allowed."""


class ConfigError(FedpdError):
    """A config value is missing, unknown, of the wrong type or out of range."""


class DataError(FedpdError):
    """A dataset file is missing, truncated or fails its checksum."""


def reason(err: BaseException, limit: int = 120) -> str:
    """An exception as one short line for a message: its type and the first line of its text (the
    type alone when the text is empty — e.g. an ``IndexError`` from reading an empty file)."""
    lines = str(err).strip().splitlines()
    text = lines[0][:limit] if lines else ""
    return f"{type(err).__name__}: {text}" if text else type(err).__name__
