"""The paper's claims declared as rows, and the one module that judges them."""
