"""What a broker knows of the cluster: topics and their configs (from the controller),
broker membership, client AZs, and the Metadata, DescribeTopicPartitions and
DescribeCluster handlers."""
