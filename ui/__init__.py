"""The web UI: a Streamlit app that watches, inspects, compares and launches searches (`crucible ui`)."""
