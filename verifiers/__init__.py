"""Generic checks and back ends for candidate programs; knows no target."""
