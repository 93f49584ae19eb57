"""shelfhand."""
