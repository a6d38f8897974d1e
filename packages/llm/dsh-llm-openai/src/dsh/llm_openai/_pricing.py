"""What a model call cost: its token counts priced from the ``genai-prices`` table
(maintained by Pydantic; OpenAI, DeepSeek and most hosted providers, cached-input rates
included).

The provider is found from the server's URL (``api.openai.com``, ``api.deepseek.com``,
...), else from the model name alone (a local server serving ``gpt-4o-mini`` is
priced as OpenAI's); ``pricing = "none"`` turns pricing off, and a provider id
(``pricing = "openai"``) names the provider whatever the URL. No price known: the
usage keeps ``cost_usd = None``, which ``dsh run`` reports as "cost unknown".

The table takes about a second to load, so :func:`warm` loads it in a thread of its
own when an adapter is made, and :func:`priced` runs in a worker thread until it has.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import threading
from functools import lru_cache
from typing import Any

from dsh.core import Usage

__all__ = ["price", "priced", "ready", "warm"]

_log = logging.getLogger("dsh.llm_openai")

_loaded = threading.Event()
_loading = threading.Lock()


def warm() -> None:
    """Load the price table in a daemon thread (once per process)."""
    if _loaded.is_set() or _loading.locked():
        return
    threading.Thread(target=_load, name="dsh-genai-prices", daemon=True).start()


def _load() -> Any:
    with _loading:
        import genai_prices

        if not _loaded.is_set():
            # The first calculation reads the table: pay for it here (a table without
            # that model is no matter).
            with contextlib.suppress(Exception):
                genai_prices.calc_price(
                    genai_prices.Usage(input_tokens=1, output_tokens=1),
                    model_ref="gpt-4o-mini",
                    provider_id="openai",
                )
            _loaded.set()
        return genai_prices


def ready() -> bool:
    """True once the table is loaded (pricing then takes microseconds)."""
    return _loaded.is_set()


def price(usage: Usage, model: str, base_url: str, pricing: str) -> float | None:
    """The cost of ``usage`` in US dollars, or None when no price is known (or
    ``pricing`` is ``"none"``). ``input_tokens`` includes ``cached_input_tokens``."""
    if pricing == "none" or not (usage.input_tokens or usage.output_tokens):
        return None
    genai_prices = _load()
    found = _match(model, base_url, pricing)
    if found is None:
        return None
    provider_id, model_ref = found
    cached = usage.cached_input_tokens or 0
    try:
        result = genai_prices.calc_price(
            genai_prices.Usage(
                input_tokens=usage.input_tokens,
                cache_read_tokens=min(cached, usage.input_tokens),
                output_tokens=usage.output_tokens,
            ),
            model_ref=model_ref,
            provider_id=provider_id,
        )
    except Exception as exc:  # a table entry without a rate this usage needs
        _log.debug("no price for %s (%s): %s", model, provider_id, exc)
        return None
    return float(result.total_price)


def priced(usage: Usage, model: str, base_url: str, pricing: str) -> Usage:
    """``usage`` with ``cost_usd`` set where a price is known."""
    cost = price(usage, model, base_url, pricing)
    return usage if cost is None else dataclasses.replace(usage, cost_usd=cost)


@lru_cache(maxsize=64)
def _match(model: str, base_url: str, pricing: str) -> tuple[str, str] | None:
    """``(provider id, model ref)`` the table knows for this model, or None."""
    genai_prices = _load()
    probe = genai_prices.Usage(input_tokens=1, output_tokens=1)
    attempts: list[dict[str, Any]]
    if pricing != "auto":
        attempts = [{"provider_id": pricing}]
    else:
        attempts = [{"provider_api_url": base_url}, {}]
    for where in attempts:
        try:
            result = genai_prices.calc_price(probe, model_ref=model, **where)
        except Exception:  # LookupError: no such provider, or no such model there
            continue
        return str(result.provider.id), model
    return None
