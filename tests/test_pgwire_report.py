"""pktflow.pgwire.report on the PostgreSQL decoder's facts: the findings and the stop reasons the
reference decoder (the Python pass) reported for the same bytes. The cases cover every event and
stop reason; their facts were written by pktflow-core (serde_json), their reports by the
reference, but for those of issue 36 (a mid-stream connection's proof, a startup cut by the
snapshot length, another protocol, a message of the wrong shape, no proof), whose words are
pktflow's own. (The rest of the layout is the core's: the golden reports check it end to
end.)"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from pktflow.pgwire.report import conversation_findings, stop_reason

CASES = json.loads((Path(__file__).parent / "golden" / "pgwire-report-facts.json").read_text())


def as_tuples(v: Any) -> Any:
    """The facts as pythonize gives them: pairs as tuples, not lists."""
    if isinstance(v, dict):
        return {k: as_tuples(x) for k, x in v.items()}
    if isinstance(v, list):
        items = [as_tuples(x) for x in v]
        return tuple(items) if len(items) == 2 and all(isinstance(x, int) for x in items) else items
    return v


@pytest.mark.parametrize("case", CASES, ids=[f"{i}-{c['source'][-40:]}" for i, c in enumerate(CASES)])
@pytest.mark.parametrize("shape", [lambda f: f, as_tuples], ids=["json", "pythonize"])
def test_words_of_facts(case: dict[str, Any], shape: Any) -> None:
    facts = shape(case["facts"])
    stopped = (case["report"] or {}).get("decode_stopped")
    if stopped is not None:
        assert stop_reason(facts["decode_stopped"]["reason"]) == stopped["reason"]
    found = [[f.severity, f.code, f.message, f.connection, list(f.frames)]
             for f in conversation_findings(facts["events"], case["conn_id"])]
    assert found == case["findings"]


def test_every_event_and_reason_is_covered() -> None:
    events = {e["kind"] for c in CASES for e in c["facts"]["events"]}
    reasons = {e["reason"]["kind"] for c in CASES for e in c["facts"]["events"] if "reason" in e}
    assert events == {"resync", "mid_stream", "startup_cut", "encrypted", "not_postgresql",
                      "malformed", "server_error", "query_error", "query_errors_total",
                      "queries_capped"}
    assert reasons == {"length_under_4", "length_absurd", "not_role_type", "wrong_length",
                       "not_startup", "tls_without_alpn", "no_framing", "other_protocol",
                       "misfit", "unproven", "nothing_captured"}


def test_every_stop_reason_is_worded() -> None:
    said = {c["report"]["decode_stopped"]["reason"] for c in CASES
            if c["report"] is not None and c["report"]["decode_stopped"] is not None}
    assert len(said) >= 3
