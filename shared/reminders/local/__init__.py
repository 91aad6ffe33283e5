"""The one-machine runtime: local stand-ins for what AWS and receivers provide."""
