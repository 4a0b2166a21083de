"""The bookie's lifecycle room: the :class:`Bookie` that starts, registers, checks and stops
the storage and server rooms, and its metadata registration.
"""

from walkit_bookie.lifecycle._bookie import Bookie
from walkit_bookie.lifecycle._registration import Registration

__all__ = ["Bookie", "Registration"]
