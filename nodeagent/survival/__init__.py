"""What outlives an agent: its state directory, its lease, adoption by the next incarnation."""
