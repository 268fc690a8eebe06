"""What every seedwheel package shares, below langmodels/ in the layering: the error base."""

from core.errors import SeedwheelError

__all__ = ["SeedwheelError"]
