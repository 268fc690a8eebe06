"""JSON Pointers (RFC 6901), the one way problems say where in a record they are."""

from collections.abc import Iterable


def json_pointer(parts: Iterable[str | int], prefix: str = "") -> str:
    """Join path parts into a JSON Pointer under `prefix`.

    Example:
        >>> json_pointer(["prompt", 0, "content"])
        '/prompt/0/content'
        >>> json_pointer(["a/b"], prefix="/verifier/params")
        '/verifier/params/a~1b'
    """
    escaped = [str(p).replace("~", "~0").replace("/", "~1") for p in parts]
    return prefix + "".join("/" + p for p in escaped) if escaped else prefix or "/"
