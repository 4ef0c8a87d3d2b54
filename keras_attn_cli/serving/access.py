"""Who may call what on `keras-attn serve`: one rule for every protocol.

A call is one of four kinds: a health check (liveness, readiness), a
management call (loading or unloading models), an OpenAPI page, or any
other. Management calls and the OpenAPI pages are off unless a flag
turns them on; with a bearer token, every call but the health checks
must carry it. `refusal` decides; each protocol (`http_routes.Gate`,
`grpc_api.Gate`) only names a call's kind and translates the refusal
into its own status (REST: 404 and 401; gRPC: UNIMPLEMENTED and
UNAUTHENTICATED).
"""

import hmac

HEALTH, MANAGEMENT, DOCS, OTHER = "health", "management", "docs", "other"
# The settings `serve` takes (`--auth-token-file`,
# `--enable-model-management`, `--enable-docs`, `--grpc-port`).
ACCESS = {
    "token": None,
    "model_management": False,
    "docs": False,
    "grpc_port": 0,
}
# The flag that turns a kind of call on.
TURNED_ON_BY = {MANAGEMENT: "--enable-model-management", DOCS: "--enable-docs"}
SETTING = {MANAGEMENT: "model_management", DOCS: "docs"}


class Refusal:
    """Why a call is refused: `off` (the flag that would turn it on) or
    `unauthorized` (no or a wrong token)."""

    def __init__(self, off=None):
        self.off = off
        self.unauthorized = off is None


def refusal(kind, authorization, access):
    """`None` when a call of `kind` with the `authorization` header or
    metadata it carries (bytes or text; empty when none) may go on under
    `access` (`ACCESS`'s keys), else a `Refusal`."""
    access = {**ACCESS, **access}
    if kind in SETTING and not access[SETTING[kind]]:
        return Refusal(off=TURNED_ON_BY[kind])
    token = access["token"]
    if token and kind != HEALTH:
        given = authorization
        if isinstance(given, str):
            given = given.encode("utf-8")
        if not hmac.compare_digest(given or b"", b"Bearer " + token.encode()):
            return Refusal()
    return None
