"""dsh.acp's framing names are dsh.jsonrpc's (the framing moved there; its tests too)."""

from __future__ import annotations

import dsh.acp
import dsh.jsonrpc


def test_dsh_acp_keeps_its_framing_names_as_dsh_jsonrpc_s() -> None:
    shared = set(dsh.acp.__all__) & set(dsh.jsonrpc.__all__)
    assert {"LineReader", "OversizedLine", "classify", "encode_message", "PARSE_ERROR"} <= shared
    assert len(shared) == 15  # every framing name dsh.acp had
    for name in shared:
        assert getattr(dsh.acp, name) is getattr(dsh.jsonrpc, name), name
