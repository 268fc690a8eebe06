"""Untrusted text inside a prompt: delimited as data under a tag the text itself cannot close.

Model output and production logs reach prompts (a rewrite of a task, a judgment of it). Each such text goes in a
block `<tag> ... </tag>` whose tag is derived from the text, with an instruction that the block is data, not
instructions. Shared by every prompt that embeds untrusted text, so they all delimit it the same way.
"""

from __future__ import annotations

import hashlib


def data_tag(original: str) -> str:
    """The delimiter name for one original text: `task-` plus 12 hex digits of its SHA-256.

    Derived from the text itself, so a task cannot contain its own closing delimiter (that would need a hash
    fixed point) and cannot break out of the data block; deterministic, so cache keys stay stable.

    Args:
        original: the untrusted text the block will hold.

    Returns:
        The tag name.

    Example:
        >>> data_tag("2+2?")
        'task-30ad205245cd'
    """
    return "task-" + hashlib.sha256(original.encode("utf-8")).hexdigest()[:12]
