"""Autorecovery inside a bookie process: an auditor candidate and a worker, never fatal.

``walkit-bookie`` starts :func:`run_bookie_autorecovery` in its task group unless it was given
``--no-autorecovery``. A failure here (the metadata store unreachable, say) is logged and
retried after a pause: it must never take the bookie down.
"""

from __future__ import annotations

import random
from typing import Any

import anyio

from walkit._core.types import BookieId
from walkit._logging import get_logger
from walkit.autorecovery._copy import LocalCopies
from walkit.autorecovery._options import AutorecoveryOptions
from walkit.errors import WalkitError

log = get_logger(__name__)

__all__ = ["run_bookie_autorecovery"]

#: Pause before starting again after a failure.
RESTART_DELAY = 5.0


async def run_bookie_autorecovery(
    url: str,
    bookie_id: BookieId,
    *,
    lost_bookie_delay: float | None = None,
    options: AutorecoveryOptions | None = None,
    tls_files: tuple[str | None, str | None, str | None] = (None, None, None),
    auth: Any = None,
    registry: Any = None,
    rng: random.Random | None = None,
    local: LocalCopies | None = None,
    background: bool = True,
    fragment_copies: bool = True,
) -> None:
    """Run autorecovery for the bookie ``bookie_id`` until cancelled (never raises).

    ``tls_files``: the bookie's (cert, key, ca); with a cert, the worker talks TLS to the
    other bookies, presenting the bookie's certificate and checking theirs against ``ca``.
    ``auth``: the worker's credentials for bookies that authenticate clients (an
    ``AuthProvider`` such as ``walkit.TokenAuth``). ``options``: the worker's rate limits and
    window. ``local``: the bookie's own store, so copies to it skip the network.
    ``background``: run the auditor candidate and the worker (False: only answer
    COPY_FRAGMENT requests, with ``fragment_copies``).
    """
    from walkit.autorecovery._run import run_autorecovery
    from walkit.client import Client
    from walkit.net import TLSConfig

    cert, key, ca = tls_files
    tls = None if cert is None else TLSConfig(cert=cert, key=key, ca=ca)

    rng = rng or random.Random()
    while True:
        try:
            async with Client.connect(url, tls=tls, auth=auth, rng=rng) as client:
                log.info(
                    "autorecovery_started",
                    bookie_id=str(bookie_id),
                    auditor_and_worker=background,
                    fragment_copies=fragment_copies,
                )
                await run_autorecovery(
                    client,
                    name=str(bookie_id),
                    options=options,
                    registry=registry,
                    rng=rng,
                    lost_bookie_delay=lost_bookie_delay,
                    local=local,
                    background=background,
                    fragment_copies=fragment_copies,
                )
        except WalkitError as exc:
            log.warning("autorecovery_stopped", bookie_id=str(bookie_id), error=str(exc))
        except Exception as exc:  # a bug here must not take the bookie down with it
            log.error(
                "autorecovery_crashed",
                bookie_id=str(bookie_id),
                error=f"{type(exc).__name__}: {exc}",
            )
        registry = None  # the metrics stay registered from the first run
        await anyio.sleep(RESTART_DELAY)
