"""Administration APIs: topics, configs, client quotas, reassignments, leader election,
record deletion and log dirs."""
