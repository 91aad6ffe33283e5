"""Channels: the ports a delivery leaves through (webhook, email, SMS)."""
