"""The deployed stack on one machine: its functions from their built assets, each in a
process of its own through the Lambda Runtime API."""
