"""sumi: an event-sourced Host for QueueConsumer 0.3.0 and DurableWorkflow 0.3.0 on Kafka."""

__version__ = "0.1.0"
