"""The Host layer: what runs the services as one Host, above every engine.

`up` starts a Host (its broker, database and services), `supervisor` keeps the services running,
`services` names each service's entry, `bootstrap` prepares topics, schema and the admin token,
`replica` holds a replica's name, `signals` turns stop signals into a clean stop, `audit` replays
the log against the read side, and `queue_service` puts the queue engine together with the
workflow client (above both engine packages, so neither imports the other).
"""
