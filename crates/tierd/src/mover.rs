//! move_pages(2) placement queries and page moves (being written).
