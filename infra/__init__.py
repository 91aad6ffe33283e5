"""AWS CDK app that deploys the reminders service."""
