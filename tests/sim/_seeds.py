"""A schedule as one integer: its fields are the digits of a mixed-radix number (least
significant first), and what is left above them is the seed of its generators. So one line
replays a schedule (``WALKIT_SIM_SEED``), and Hypothesis draws and shrinks each field."""

from __future__ import annotations

from collections.abc import Mapping, Sequence


def pack(
    values: Mapping[str, int],
    rng_seed: int,
    fields: Sequence[tuple[str, int]],
    offsets: Mapping[str, int],
    default_offset: int,
) -> int:
    """The seed of ``values`` (each field's value minus its offset is its digit)."""
    value = rng_seed
    for name, radix in reversed(fields):
        digit = values[name] - offsets.get(name, default_offset)
        if not 0 <= digit < radix:
            raise ValueError(f"{name}={values[name]} out of range")
        value = value * radix + digit
    return value


def unpack(
    seed: int,
    fields: Sequence[tuple[str, int]],
    offsets: Mapping[str, int],
    default_offset: int,
) -> tuple[dict[str, int], int]:
    """The fields of ``seed`` and the generator seed (any integer >= 0 is a schedule)."""
    if seed < 0:
        raise ValueError("a scenario seed is >= 0")
    values: dict[str, int] = {}
    for name, radix in fields:
        seed, digit = divmod(seed, radix)
        values[name] = digit + offsets.get(name, default_offset)
    return values, seed
