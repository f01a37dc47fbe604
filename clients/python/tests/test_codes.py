"""The client's code tables held to the server's: every code of
clients/conformance/codes.json (made from the server's source by the Go
test there: each code with its HTTP status and its group, the Go ``Err*``
sentinel it matches) has the server's status here and an error class meant
for it.
"""

from __future__ import annotations

import json

from harness import ROOT
from pigeon_client.errors import DeniedError, http_status, new_error

CODES = json.loads((ROOT / "clients/conformance/codes.json").read_text())["codes"]


def test_codes_json_lists_the_server_codes() -> None:
    assert len(CODES) > 50
    assert {"TOO_MANY_CONTRACTS", "TOO_MANY_SUBSCRIPTIONS", "STORE_FULL"} <= {c["code"] for c in CODES}


def test_every_server_code_has_the_server_status() -> None:
    wrong = [
        f"{c['code']}: http_status gives {http_status(c['code'])}, the server {c['status']}"
        for c in CODES
        if http_status(c["code"]) != c["status"]
    ]
    assert not wrong, "\n" + "\n".join(wrong)


def test_every_server_code_has_a_class_meant_for_it() -> None:
    """A code errors.py does not classify becomes a plain DeniedError (refused
    by policy, nothing stored). That is the class meant for the server's
    group "denied" only: every other code must be classified in errors.py."""
    wrong = [
        f"{c['code']} (server group {c['group']}) falls to DeniedError: classify it in errors.py"
        for c in CODES
        if type(new_error(c["code"])) is DeniedError and c["group"] != "denied"
    ]
    assert not wrong, "\n" + "\n".join(wrong)
