// Placeholder: the load generator arrives in its own commit.
int main() { return 1; }
