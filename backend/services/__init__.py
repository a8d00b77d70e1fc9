"""What the routes call: ingest and queries, the live event feed, run creation, Ray dispatch."""
