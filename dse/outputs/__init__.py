"""What a results folder turns into: exported files and plots."""
