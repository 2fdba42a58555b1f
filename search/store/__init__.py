"""The run store: its tables, their migrations, typed reads and writes, and the read model."""
