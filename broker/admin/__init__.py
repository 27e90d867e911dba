"""Administration APIs: topics, configs, ACLs, SCRAM credentials, client quotas,
reassignments, leader election, record deletion and log dirs. Most forward to the
controller (``broker.metadata.controller_client``)."""
