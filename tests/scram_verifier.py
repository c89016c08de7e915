"""The tests' PostgreSQL password as a SCRAM-SHA-256 verifier of few iterations (RFC 5802, RFC 7677), which
`make postgresql` stores for the postgres role in place of the 4,096-iteration one PostgreSQL would make.

The password is the Makefile's, in the clear, so the iterations protect nothing there, while each connection
pays for them on both sides: about 5 ms of CPU. Dagster's PostgreSQL storage opens a connection per query
(SQLAlchemy's NullPool): 15–38 a second while the deployment tests run (bench/HISTORY.md). PostgreSQL
accepts a verifier made by the client, with the iterations it names; a wrong password is refused as before
(tests/test_bad_configuration.py). Production servers keep their own verifiers.

    python3 tests/scram_verifier.py PASSWORD ITERATIONS
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
import sys


def scram_verifier(password: str, iterations: int) -> str:
    salt = os.urandom(16)
    salted = hashlib.pbkdf2_hmac("sha256", password.encode(), salt, iterations)
    client_key = hmac.new(salted, b"Client Key", "sha256").digest()
    server_key = hmac.new(salted, b"Server Key", "sha256").digest()
    stored_key = hashlib.sha256(client_key).digest()
    encoded = [base64.b64encode(value).decode() for value in (salt, stored_key, server_key)]
    return f"SCRAM-SHA-256${iterations}:{encoded[0]}${encoded[1]}:{encoded[2]}"


if __name__ == "__main__":
    print(scram_verifier(sys.argv[1], int(sys.argv[2])))
