"""What every seedwheel package shares, below llm/ in the layering: the error base."""

from core.errors import SeedwheelError

__all__ = ["SeedwheelError"]
