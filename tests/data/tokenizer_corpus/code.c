/* A small C file: tabs, indentation and trailing spaces.   */
#include <stdio.h>
#include <stdint.h>

static int add(int a, int b) {
	return a + b;   
}

int main(int argc, char **argv) {
    uint64_t total = 0x1234abcdULL;	// hex and a tab
    for (int i = 0; i < argc; i++) {
        if (argv[i][0] == '-' && argv[i][1] != '\0')
            total += (uint64_t)add(i, 42) * 3;
		else
			printf("arg %d: '%s'\n", i, argv[i]);
    }
    return total > 1e9 ? 1 : 0;  
}
