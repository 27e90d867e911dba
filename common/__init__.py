"""What the controller and the broker both need, below both (as Kafka's
``org.apache.kafka.common`` sits below its clients, brokers and controllers).

- ``acl``: Kafka's ACL model (bindings, filters, their codes and checks).
- ``topic_config_keys``: the table of topic configs; ``topic_config_validation``: the rules
  a new value must pass, applied by the broker before it forwards a change and by the
  controller before it records one.
- ``secret_reference``: ``${file:...}`` and ``${env:...}`` config values.
- ``http_server``: serving an aiohttp app on a port (the controller's API, the broker's
  metrics and health endpoint).
- ``background``: stopping a component's background tasks.

Nothing here imports the broker, the controller or storage.
"""
