"""Who may talk to a controller: the rule both ends check before they start.

The controller's HTTP API registers brokers, writes SCRAM credentials and ACLs and serves the
whole metadata log; its Raft transport replicates that log. Both trust whoever holds
``controller.secret``. A controller (or a broker pointed at one) therefore refuses to start
without a secret that could not be guessed: none, a well-known default such as the
``change-me`` an old compose file shipped, or one too short to resist guessing.

``controller.insecure.allow.unauthenticated=true`` is the explicit way out, for a dev box or a
network the operator trusts completely: the API then answers anyone and the Raft messages are
signed with an empty key, which anyone can forge. ``sluice dev`` never needs it: its embedded
controller gets a random secret of its own.
"""

from __future__ import annotations

INSECURE_KEY = "controller.insecure.allow.unauthenticated"
SECRET_KEY = "controller.secret"
MIN_SECRET_LENGTH = 16
# Defaults shipped by this project's older files and the obvious placeholders.
WELL_KNOWN_SECRETS = frozenset(
    {"change-me", "changeme", "change_me", "secret", "sluice", "password", "test"}
)

GENERATE_HINT = "e.g. python3 -c 'import secrets; print(secrets.token_urlsafe(32))'"


def secret_problem(secret: str, allow_unauthenticated: bool) -> str | None:
    """Why ``secret`` may not guard a controller (None: it may)."""
    if allow_unauthenticated:
        return None
    if not secret:
        return (
            f"{SECRET_KEY} is not set: anyone who reaches the controllers could register "
            f"brokers, write credentials and ACLs and read the metadata log. Set a random "
            f"{SECRET_KEY} ({GENERATE_HINT}), the same on every controller and broker, or "
            f"{INSECURE_KEY}=true on a network you trust completely (development only)"
        )
    if secret.lower() in WELL_KNOWN_SECRETS:
        return f"{SECRET_KEY} is a well-known default; set a random one ({GENERATE_HINT})"
    if len(secret) < MIN_SECRET_LENGTH:
        return (
            f"{SECRET_KEY} is shorter than {MIN_SECRET_LENGTH} characters; set a random one "
            f"({GENERATE_HINT})"
        )
    return None
