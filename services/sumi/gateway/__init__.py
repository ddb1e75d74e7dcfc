"""The HTTP gateway: Host API v2 (host-api.md) over Kafka commands and Postgres reads.

It decides nothing that needs state (architecture.md rule 4): writes become
commands whose decisions it waits for; reads come from the projections.
"""

from sumi.gateway._app import create_app

__all__ = ["create_app"]
