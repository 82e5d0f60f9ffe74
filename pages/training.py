"""training page (placeholder until its issue lands)."""
import streamlit as st

st.title("Training")
st.info("This page is being built.")
