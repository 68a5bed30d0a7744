"""The peers: what a user would run instead, started locally from Debian packages by the suite."""
