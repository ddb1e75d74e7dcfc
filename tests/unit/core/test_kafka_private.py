"""The only private aiokafka parts sumi uses (in sumi.wire.kafka): this fails when a new aiokafka moves them."""

import inspect

import aiokafka.producer.sender as sender
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

from sumi.wire import kafka


async def test_consumer_metadata_refresh_is_where_kafka_py_calls_it() -> None:
    consumer = AIOKafkaConsumer(bootstrap_servers="127.0.0.1:1")  # never started: no connection
    try:
        pending = consumer._client.force_metadata_update()  # asks the client's metadata task for a refresh
        assert inspect.isawaitable(pending)
        pending.cancel()
    finally:
        await consumer.stop()
    assert "_client.force_metadata_update" in inspect.getsource(kafka._refresh_metadata)


def test_transaction_retry_backoff_is_a_module_float_the_sender_reads() -> None:
    assert isinstance(sender.BACKOFF_OVERRIDE, float)
    # the sender must still read the module global at retry time, or setting it does nothing
    assert "return BACKOFF_OVERRIDE" in inspect.getsource(sender)
    before = sender.BACKOFF_OVERRIDE
    try:
        kafka.shorten_txn_retry()
        assert sender.BACKOFF_OVERRIDE == min(before, kafka.TXN_RETRY_S)
    finally:
        sender.BACKOFF_OVERRIDE = before


async def test_producer_client_answers_metadata_requests() -> None:
    producer = AIOKafkaProducer(bootstrap_servers="127.0.0.1:1")  # never started: no connection
    try:
        assert inspect.iscoroutinefunction(producer.client.fetch_all_metadata)
    finally:
        await producer.stop()
    assert "client.fetch_all_metadata" in inspect.getsource(kafka.reachable)
