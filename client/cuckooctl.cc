// Placeholder: cuckooctl arrives in the next commit.
int main() { return 1; }
