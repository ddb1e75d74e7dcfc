"""The verifier service: loads every new WorkerVersion once in a sandbox and reports what it exports.

A service of its own (it reads the control log and writes commands), so it lives beside
the other services rather than inside `sumi.runtime`, which it only uses."""

from sumi.verifier.service import PRINCIPAL, Verifier, serve

__all__ = ["PRINCIPAL", "Verifier", "serve"]
