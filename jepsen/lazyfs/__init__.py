"""A FUSE filesystem that forgets what was never made durable (lazyfs's model): jepsen/README.md."""
