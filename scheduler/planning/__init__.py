"""What policies plan with: placement, availability profiles, EASY's shadow, scratch bookings."""
