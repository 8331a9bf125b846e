/* A child process for the multi-process store tests. */
int main(void)
{
	return 0;
}
